"""Shared by unreachabled and its clients: proto conversion and channels."""
