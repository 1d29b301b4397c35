"""A scan's result and the formats it is written in (one reporter per file)."""
