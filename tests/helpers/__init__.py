"""What the tests share, imported by name (``from helpers.synthetic import ...``; pytest puts tests/ on the path):
``synthetic`` (the synthetic runs and the oracle of the episodes they hold), ``envtools`` (the devices and a host
rollout), ``blocking`` (waiting for a thread to block), ``crashsim`` (a recording's crash states), ``scripts`` (bench
and tools scripts loaded as modules; a command line with Warp, Newton and torch blocked), ``torch_policies`` (user
policies for ``--policy helpers.torch_policies:NAME``) and the reference tasks the task files are checked against."""
