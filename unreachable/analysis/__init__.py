"""Analyses over several snapshots: what grew between two heap dumps or scans."""
