"""A made-up adapter module that crosses the worker/harness boundary, for tests/test_boundary.py: it
imports a framework that is not its own at the top, and the harness's store and statistics inside a
method. Never imported."""
import json

import numpy as np
import tensorflow
import torch

from dlbench.worker.base import BaseAdapter


class Adapter(BaseAdapter):
    def evaluate(self, data):
        from dlbench.harness.analysis import stats
        from dlbench.harness.store import Store
        return {"loss": float(np.mean(data.y)), "tools": [Store, stats, json, torch, tensorflow]}
