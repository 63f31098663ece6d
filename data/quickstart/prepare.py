"""
An offline quick-start corpus in seconds: the Python standard library's own .py files (the first
~8 MB in sorted order), byte-level encoded (256 bytes + end-of-text, no download), into
data/quickstart/{train,val}.bin. A tenth of the files go to val so that it holds plenty of
256-token blocks. The corpus depends on the Python version, not on what is installed.

    python data/quickstart/prepare.py
    python data/quickstart/prepare.py --max_bytes 40e6 --data_dir data/quickstart_full   # Python 3.11's all: 31.5 MB
"""
import os
import sys
import sysconfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import cli, preparation  # noqa: E402  (needs the repo root on sys.path first)

STDLIB = "python-stdlib"
MAX_BYTES = 8_000_000


def stdlib_files(max_bytes=MAX_BYTES):
    """The standard library's .py files in sorted walk order, up to max_bytes in all."""
    files, total = [], 0
    for root, dirs, names in os.walk(sysconfig.get_paths()["stdlib"]):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "dist-packages", "__pycache__"))
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(root, name)
            total += os.path.getsize(path)
            if total > max_bytes:
                return files
            files.append(path)
    return files


if __name__ == "__main__":
    # a tenth of the files for val.bin: at the default 8 MB ~0.6M byte tokens, plenty for a tiny model
    p = preparation.parser(__doc__, source=STDLIB, data_dir="data/quickstart", encoding="bytes",
                           val_fraction=0.1, min_val_tokens=500_000)
    # more of the stdlib, for a run that should not see a byte twice (docs/ladder_evidence.md, "Unrepeated data")
    p.add_argument("--max_bytes", type=preparation.count, default=MAX_BYTES,
                   help="read the stdlib's files in sorted order up to this many bytes (default: %(default)d)")
    args = p.parse_args()
    stdlib = args.source == [STDLIB]
    if not stdlib and args.max_bytes != MAX_BYTES:
        p.error("--max_bytes reads the standard library: with --source, use --max_tokens")
    if stdlib and (problem := cli.below_least(args, {"max_bytes": 1})):
        p.error(problem)
    files = stdlib_files(args.max_bytes) if stdlib else None
    if stdlib and not files:  # the first file is larger: an empty list would fail in writing meta.json
        p.error(f"--max_bytes {args.max_bytes} selects no file of the standard library: raise it")
    source = preparation.LocalFiles([STDLIB], files, args.text_field) if stdlib else None
    sys.exit(preparation.run(args, source))
