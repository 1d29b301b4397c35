"""unreachabled: the scanning daemon (gRPC API in protos/unreachable/v1; docs/daemon.md)."""
