from __future__ import annotations

import shutil

import pytest

from unreachable.symbolize import demangle
from unreachable.symbolize.demangle import demangle_all

pytestmark = pytest.mark.skipif(shutil.which("c++filt") is None, reason="no c++filt")


def test_templates_operators_and_versions():
    names = {
        "_ZNK4demo3BoxIiEplERKS1_": "demo::Box<int>::operator+(demo::Box<int> const&) const",
        "_ZN4demo5twiceIiEET_S1_": "int demo::twice<int>(int)",
        "_ZNSt6vectorIiSaIiEEixEm": (
            "std::vector<int, std::allocator<int> >::operator[](unsigned long)"
        ),
        "_ZNKSt8functionIFvvEEclEv": "std::function<void ()>::operator()() const",
        "_Znwm@@GLIBCXX_3.4": "operator new(unsigned long)",
        "_ZdlPv@GLIBCXX_3.4": "operator delete(void*)",
        "malloc@@GLIBC_2.2.5": "malloc",
        "plain_c": "plain_c",
        "_ZZ4mainENKUlvE_clEv": "main::{lambda()#1}::operator()() const",
    }
    assert demangle_all(set(names)) == names


def test_garbage_stays_as_is():
    out = demangle_all({"_Zgarbage", "_Z" + "A" * (demangle.MAX_NAME + 1), "_Z with space"})
    assert out["_Zgarbage"] == "_Zgarbage"
    assert out["_Z with space"] == "_Z with space"


def test_a_crashing_name_is_isolated(monkeypatch):
    real = demangle._run

    def crashing(cxxfilt, names):
        return None if "_Zpoison" in names else real(cxxfilt, names)

    monkeypatch.setattr(demangle, "_run", crashing)
    out = demangle_all({"_Zpoison", "_Znwm", "_ZdlPv", "_ZN4demo5twiceIiEET_S1_"})
    assert out["_Zpoison"] == "_Zpoison"
    assert out["_Znwm"] == "operator new(unsigned long)"
    assert out["_ZN4demo5twiceIiEET_S1_"] == "int demo::twice<int>(int)"


def test_no_cxxfilt(monkeypatch):
    monkeypatch.setattr(demangle.shutil, "which", lambda _name: None)
    assert demangle_all({"_Znwm@@GLIBCXX_3.4"}) == {"_Znwm@@GLIBCXX_3.4": "_Znwm"}
