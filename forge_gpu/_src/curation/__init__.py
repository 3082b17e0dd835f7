"""What serves forge_gpu.curation: new runs made of other runs' episodes: convert (another format), curate (select,
merge, split; where: the ``--where`` expressions), writing (the writing of a new run from read episodes they share),
repair (close a killed run, salvage a damaged one), and a run's statistics."""
