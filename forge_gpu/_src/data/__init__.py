"""Reading runs: open_run, episodes, windows, torch datasets; tools and exports."""
