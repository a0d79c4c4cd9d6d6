"""`collector conformance`: checks that an agent keeps the protocol (agent.proto), over its
real gRPC socket; docs/conformance.md lists the checks."""
