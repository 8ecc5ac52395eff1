"""Each process imports what it uses (docs/performance.md#the-simulations-memory): importing the
apps loads no data, dataframe or plotting library, and a digits run loads neither flwr-datasets
nor scikit-learn's datasets (nor the scipy, seaborn and pandas they pull) nor pyplot. Each check
runs a fresh interpreter, whose `sys.modules` is the process's."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_AND_PLOTS = ("datasets", "flwr_datasets", "sklearn", "pandas", "pyarrow", "scipy", "seaborn",
                  "matplotlib", "PIL")
# what no run path uses; a digits run also reads no hub data and draws no plot with pyplot
NEVER = ("flwr_datasets", "sklearn", "scipy", "seaborn", "matplotlib.pyplot")


def loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    """The modules of `names` in sys.modules of a fresh interpreter after `code` ran."""
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps([m for m in {names!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_apps_and_the_data_modules_loads_no_data_or_plot_library():
    code = ("import server_app.app, client_app.app, strategies, strategies.assembly, run_config\n"
            "import feddata.loading, feddata.summary, feddata.partitioners, feddata.sources\n"
            "import feddata.digits, feddata.decode, feddata.disk_cache, feddata.own_data\n"
            "import reporting.plots, server_app.results")
    assert loaded_after(code, DATA_AND_PLOTS) == []


def test_a_digits_run_loads_no_flwr_datasets_scikit_learn_scipy_or_pyplot(tmp_path):
    """The default config (digits), one round in one process: the ServerApp's start (test set,
    split summary, labels.png) and the ClientApp's training and evaluation; matplotlib is there
    because plots were drawn (the check that the run got that far)."""
    code = ("from inprocess import run_in_process\n"
            f"run_in_process({{'out-dir': {str(tmp_path)!r}, 'run-name': 'run',\n"
            "                'num-server-rounds': 1, 'local-iterations': 2}, 4)")
    assert loaded_after(code, NEVER + ("matplotlib",)) == ["matplotlib"]
    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text())["status"] == "complete"
    assert (run / "labels.png").is_file() and (run / "accuracy.png").is_file()
