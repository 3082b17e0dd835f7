"""The policy options ``collect`` and ``evaluate`` share (``--policy``, ``--policy-arg``, ``--history``, ``--chunk``,
``--chunk-exec``, ...), checked before Warp loads, and the policy they load on an env."""

from __future__ import annotations

from ._common import (
    UsageError,
)


def add_policy_options(parser) -> None:
    """``--policy-arg``, ``--chunk-exec``, ``--chunk-steps`` and ``--ensemble-decay``: the factory's arguments and how
    a policy's action chunks are executed (``forge_gpu.sim.load_policy``'s ``args`` and keywords)."""
    from forge_gpu._src.sim.names import EXECUTIONS

    parser.add_argument(
        "--policy-arg",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="an argument of the policy's factory, FACTORY(spec, device, KEY=VALUE); VALUE read as JSON where it "
        'parses (2, 0.5, true, [1,2], "text"), else as a string; repeatable',
    )
    parser.add_argument(
        "--chunk-exec",
        choices=EXECUTIONS,
        default=None,
        help="a policy with action chunks: open_loop (execute K actions of a chunk, then take a new one; default) "
        "or ensemble (ACT's temporal ensembling of the overlapping chunks)",
    )
    parser.add_argument(
        "--chunk-steps", type=int, default=None, metavar="K", help="open_loop: actions run per chunk, 1..H (default H)"
    )
    parser.add_argument(
        "--ensemble-decay",
        type=float,
        default=None,
        metavar="M",
        help="ensemble: weights exp(-M*i), i = 0 for the oldest chunk (default 0.01)",
    )


def parse_policy_args(items: list[str]) -> dict:
    """``--policy-arg KEY=VALUE`` items -> ``{KEY: VALUE}``, VALUE a JSON literal where it parses, else the string;
    UsageError in one line for an item without ``=``, an empty key or a key given twice."""
    import json

    args = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--policy-arg {item!r}: expected KEY=VALUE, e.g. --policy-arg hidden=64")
        if key in args:
            raise UsageError(f"--policy-arg {item!r}: the key {key!r} is given twice")
        try:
            args[key] = json.loads(text)
        except ValueError:
            args[key] = text  # a bare word is a string
    return args


def policy_options_of(args) -> dict:
    """``--policy-arg`` and the chunk flags, checked without Warp where they can be: ``load_policy``'s ``args`` and
    keywords. What depends on the policy itself (its chunk, its factory's parameters) is checked when it loads."""
    from forge_gpu._src.sim.names import BUILTIN_POLICIES

    policy_args = parse_policy_args(args.policy_arg or [])
    given = [
        flag
        for flag, value in (
            ("--policy-arg", args.policy_arg),
            ("--chunk-exec", args.chunk_exec),
            ("--chunk-steps", args.chunk_steps),
            ("--ensemble-decay", args.ensemble_decay),
        )
        if value is not None
    ]
    if args.policy in BUILTIN_POLICIES and given:
        what = "takes no arguments" if given[0] == "--policy-arg" else "returns no action chunks"
        raise UsageError(f"{given[0]}: the built-in policy {args.policy!r} {what}")
    if args.chunk_steps is not None:
        if args.chunk_steps < 1:
            raise UsageError(f"--chunk-steps {args.chunk_steps}: must be >= 1 (and at most the policy's chunk)")
        if args.chunk_exec == "ensemble":
            raise UsageError(f"--chunk-steps {args.chunk_steps}: applies to --chunk-exec open_loop only")
    if args.ensemble_decay is not None:
        decay = args.ensemble_decay
        if not decay >= 0 or decay == float("inf"):
            raise UsageError(f"--ensemble-decay {decay}: must be a finite number >= 0")
        if args.chunk_exec != "ensemble":
            raise UsageError(f"--ensemble-decay {decay}: applies to --chunk-exec ensemble only")
    return {
        "args": policy_args,
        "execution": args.chunk_exec or "open_loop",
        "steps_per_chunk": args.chunk_steps,
        "ensemble_decay": args.ensemble_decay,
    }


def load_policy_of(args, env, options: dict):
    """``load_policy`` with the checked options; ``--chunk-exec`` refused for a policy without chunks."""
    from forge_gpu._src.sim.policies import load_policy

    policy = load_policy(args.policy, env, **options)
    if args.chunk_exec is not None and getattr(policy, "chunk", None) is None:
        raise ValueError(f"--chunk-exec {args.chunk_exec}: policy {args.policy!r} returns no action chunks")
    return policy
