"""Sum the rows of ENCODER_TEST_PROFILE (tests/conftest.py) by test file: wall and CPU
seconds, and JAX's trace / lower / compile seconds and compile count.

    ENCODER_TEST_PROFILE=/tmp/prof python -m pytest -q -m 'not e2e' tests
    python tests/profile_report.py /tmp/prof [--by=test] [--top=40]
"""
import argparse
import collections
import glob
import json


def rows(prefix: str):
    for path in sorted(glob.glob(prefix + ".*")):
        with open(path) as f:
            yield from (json.loads(line) for line in f if line.strip())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("prefix")
    parser.add_argument("--by", choices=["file", "test"], default="file")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    keys = ("wall", "cpu", "trace", "lower", "compile", "compile_n")
    sums = collections.defaultdict(lambda: dict.fromkeys(keys, 0.0))
    for row in rows(args.prefix):
        name = row["test"].split("::")[0] if args.by == "file" else row["test"]
        for k in keys:
            sums[name][k] += row.get(k, 0.0)
    total = dict.fromkeys(keys, 0.0)
    for s in sums.values():
        for k in keys:
            total[k] += s[k]
    print(f"{'':60s} {'wall':>7s} {'cpu':>7s} {'trace':>6s} {'lower':>6s} {'compile':>7s} {'n':>5s}")
    for name, s in sorted(sums.items(), key=lambda kv: -kv[1]["cpu"])[:args.top]:
        print(f"{name[-60:]:60s} {s['wall']:7.1f} {s['cpu']:7.1f} {s['trace']:6.1f} "
              f"{s['lower']:6.1f} {s['compile']:7.1f} {int(s['compile_n']):5d}")
    print(f"{'total':60s} {total['wall']:7.1f} {total['cpu']:7.1f} {total['trace']:6.1f} "
          f"{total['lower']:6.1f} {total['compile']:7.1f} {int(total['compile_n']):5d}")


if __name__ == "__main__":
    main()
