"""Reinforcement learning over the env: gymnasium's vector interface (``gym``) and RL libraries' env wrappers
(``rsl``); their libraries are optional (``pip install 'forge-gpu[rl]'``) and imported only when used."""
