"""The target's live allocations, read from the shim's registry."""
