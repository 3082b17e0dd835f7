"""Tools over runs: inspect, repair, convert, statistics."""
