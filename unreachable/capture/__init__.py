"""Stop the target's threads, read their registers, take a frozen snapshot."""
