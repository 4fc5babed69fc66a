"""syncfree for distributed training: ranks, their report files, and one merged report.

Each rank of a job (``torchrun ... -m syncfree run train.py`` or ``syncfree run
--nproc-per-node N train.py``) knows itself from torchrun's environment (`RankInfo`),
runs the script under the engine and writes its report into the job's folder
(`write_rank_report`); `MergedReport` turns the folder into one ranked list of sites with
what each rank did there, written in any format by `write_merged`.
"""

from .emit import write_merged
from .merge import MergedReport, MergedSite
from .rankfiles import RankReport, read_rank_reports, write_rank_report
from .ranks import RankEnvironmentError, RankInfo

__all__ = ["MergedReport", "MergedSite", "RankEnvironmentError", "RankInfo", "RankReport",
           "read_rank_reports", "write_merged", "write_rank_report"]
