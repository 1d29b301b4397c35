"""unreachable-cli: one module per subcommand."""
