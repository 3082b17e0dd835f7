"""Reinforcement learning over the env: gymnasium's vector interface (``gym``), RL libraries' env wrappers (``rsl``:
rsl_rl, ``sb3``: Stable-Baselines3, ``skrl``: skrl) and the trained policy's export (``rsl.export_policy``); their
libraries are optional (``pip install 'forge-gpu[rl]'``, ``[sb3]``, ``[skrl]``) and imported only when used."""
