"""E2B's envd wire: protobuf messages and Connect service stubs, vendored unchanged.

These four modules are generated code copied from the `e2b` package (2.63.0, MIT licence,
see LICENSE beside them): `process_pb`/`filesystem_pb` (messages, runtime `protobuf-py`)
and `process_connect`/`filesystem_connect` (server stubs, runtime `connectrpc`). Navi
implements the service protocols they declare; the codecs (JSON and binary protobuf) and
the Connect framing are the libraries', never ours.
"""
