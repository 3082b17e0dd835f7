"""Collection: the transport, the collector and the distributed collector."""
