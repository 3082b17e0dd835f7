"""What serves forge_gpu.export: runs written as LeRobot v3 and robomimic HDF5 datasets."""
