"""The simulation: Warp and Newton (device, step results, config, env, tasks, policies, make, doctor)."""
