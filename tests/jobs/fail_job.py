"""A job that exits with the code given as its first argument (or sleeps forever on ``hang``)."""

import sys
import time

if sys.argv[1] == "hang":
    time.sleep(600)
sys.exit(int(sys.argv[1]))
