"""What ``gcc-dask info`` reports: versions, GPU availability, and the cluster a run would use."""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version

__all__ = ["package_versions", "collect_info", "git_sha"]

_PACKAGES = ("gcc-dask", "dask", "distributed", "numpy", "scipy", "zarr", "xarray", "pydantic",
             "onnxruntime", "array-api-compat", "cupy-cuda12x", "torch")


def package_versions() -> dict[str, str]:
    """Installed versions of gcc-dask and the libraries it runs on ("not installed" when absent)."""
    out = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_sha(path: str | None = None) -> str | None:
    """The git commit of the working tree at ``path`` (default: the current directory), or None."""
    import subprocess

    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def collect_info(scheduler: str | None = None, timeout: float = 5.0) -> dict[str, str]:
    """Versions, platform, GPU availability and cluster reachability, as printable strings."""
    from gcc_dask.runtime.cluster import ClusterSpec, describe_target, gpu_available

    info = {"platform": platform.platform()}
    info.update(package_versions())
    ok, detail = gpu_available()
    info["gpu"] = f"available ({detail})" if ok else f"not available ({detail})"
    spec = ClusterSpec(address=scheduler, connect_timeout=timeout)
    info["cluster"] = describe_target(spec)
    if scheduler:
        from distributed import Client

        try:
            with Client(scheduler, timeout=timeout) as c:
                n = len(c.scheduler_info().get("workers", {}))
            info["cluster"] += f": reachable, {n} workers"
        except Exception as e:
            info["cluster"] += f": NOT reachable ({type(e).__name__})"
    return info
