"""The ``bayes-planet`` command line.

    bayes-planet demo [--epochs 20] [--samples 20] [--seed 0]

Errors in arguments are reported as one-line messages, not tracebacks.
"""

import argparse
import sys

__all__ = ["main"]


def _demo(args):
    from bayes_planet import demo

    demo.run(epochs=args.epochs, samples=args.samples, seed=args.seed)


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {text}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bayes-planet",
        description="Bayesian Layers for Keras and a Bayesian PlaNet agent.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="drop-in Bayesian CNN on scikit-learn's digits")
    demo.add_argument("--epochs", type=_positive_int, default=20)
    demo.add_argument("--samples", type=_positive_int, default=20,
                      help="Monte Carlo samples for the predictive distribution")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"bayes-planet {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
