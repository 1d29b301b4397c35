"""Which memory of the target is a root of the mark phase."""
