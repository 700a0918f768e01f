"""``python -m tudui``: Ctrl-C while torch is still being imported also ends in one line."""
import sys

try:
    from .cli import main
except KeyboardInterrupt:
    print("tudui: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
