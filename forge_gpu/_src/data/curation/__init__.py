"""New runs made of other runs' episodes: convert (another format), curate (select, merge, split; where: the
``--where`` expressions), writing (the writing of a new run from read episodes they share), and a run's
statistics (run_statistics)."""
