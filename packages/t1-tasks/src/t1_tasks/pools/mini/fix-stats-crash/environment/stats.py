"""Summarise a file of measurements: usage python3 stats.py FILE."""

import sys


def main(path):
    values = []
    with open(path) as fh:
        for line in fh:
            values.append(float(line))
    values.sort()
    n = len(values)
    mean = sum(values) / n
    median = values[n // 2]
    print(f"count={n} mean={mean:.3f} median={median:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
