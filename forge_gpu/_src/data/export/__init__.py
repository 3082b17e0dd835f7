"""Exports: LeRobot v3 and robomimic HDF5."""
