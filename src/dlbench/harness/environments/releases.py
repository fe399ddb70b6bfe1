"""A framework's releases on the package registry, for version ranges: `pytorch@2.7..2.13` in a suite's
frameworks or after -f names the newest release of every minor version from 2.7 to 2.13 that the registry holds
for the recipe's Python, each its own environment.

The registry is the one uv builds the environments from (UV_DEFAULT_INDEX or UV_INDEX_URL, else PyPI), read
through its simple API (PEP 503/691) by pypi-simple."""
import os
from collections.abc import Iterable

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from dlbench.harness.environments.envs import RECIPES, EnvError, Recipe, split_spec

RANGE = ".."  # name@LOW..HIGH
TIMEOUT_S = 60  # for one project page: the registry's, or a test's on loopback


def is_range(spec: str) -> bool:
    return RANGE in spec.partition("@")[2]


def index_url() -> str:
    from pypi_simple import PYPI_SIMPLE_ENDPOINT

    return os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or PYPI_SIMPLE_ENDPOINT


def releases(recipe: Recipe) -> list[Version]:
    """The final releases of the recipe's version_package that have a file not yanked and installable on the
    recipe's Python, oldest first."""
    from pypi_simple import NoSuchProjectError, PyPISimple

    url = index_url()
    try:
        with PyPISimple(endpoint=url) as client:
            page = client.get_project_page(recipe.version_package, timeout=TIMEOUT_S)
    except NoSuchProjectError:
        raise EnvError(f"{recipe.framework}: the registry {url} has no project {recipe.version_package!r}") from None
    except Exception as error:  # requests' and pypi-simple's errors alike: the registry could not be read
        raise EnvError(f"{recipe.framework}: could not list {recipe.version_package}'s releases from {url}: "
                       f"{error}") from None
    python = Version(recipe.python)
    found = set()
    for package in page.packages:
        if package.version is None or package.is_yanked:
            continue
        try:
            version = Version(package.version)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or version.local:
            continue
        if package.requires_python and not _admits(package.requires_python, python):
            continue
        found.add(version)
    return sorted(found)


def _admits(requires_python: str, python: Version) -> bool:
    """Whether a file's Requires-Python admits the recipe's Python; one that is no valid specifier (old uploads
    have such) says nothing, and admits it."""
    try:
        return python in SpecifierSet(requires_python)
    except InvalidSpecifier:
        return True


def _bound(spec: str, text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise EnvError(f"{spec!r}: {text!r} is not a version number; a range is name@LOW..HIGH, "
                       "e.g. pytorch@2.7..2.13") from None


def bounds(spec: str) -> tuple[str, Version, Version]:
    """(name, LOW, HIGH) of name@LOW..HIGH."""
    name, text = split_spec(spec)
    low_text, _, high_text = (text or "").partition(RANGE)
    low, high = _bound(spec, low_text), _bound(spec, high_text)
    if low > high:
        raise EnvError(f"{spec!r}: the range's low end {low} is above its high end {high}")
    return name, low, high


def within(version: Version, low: Version, high: Version) -> bool:
    """LOW <= version <= HIGH, where HIGH given as X.Y covers every X.Y.Z."""
    return low <= version and (version <= high or version.release[:len(high.release)] == high.release)


def expand(spec: str) -> list[str]:
    """name@LOW..HIGH as name@version specs, oldest first: the newest release of each minor version from LOW's to
    HIGH's (HIGH as X.Y takes X.Y's newest patch) that the registry holds, the recipe's default as the name alone.
    Refused where one lies outside the versions the recipe supports, or where the range holds no release."""
    name, low, high = bounds(spec)
    recipe = RECIPES[name]
    newest: dict[tuple[int, ...], Version] = {}
    for version in releases(recipe):
        if within(version, low, high):
            newest[version.release[:2]] = version
    if not newest:
        raise EnvError(f"{spec!r}: the registry {index_url()} holds no release of {recipe.version_package} "
                       f"from {low} to {high}")
    for version in newest.values():
        recipe.for_version(str(version))  # outside the supported versions: refused, saying which are
    # the default version by its name alone, as a suite names it: its runs are then the same cells as the suite's
    return [name if str(version) == recipe.default_version else f"{name}@{version}"
            for version in sorted(newest.values())]


def expanded(specs: Iterable[str]) -> list[str]:
    """The specs with every range expanded in place, each spec once."""
    found: list[str] = []
    for spec in specs:
        for one in expand(spec) if is_range(spec) else [spec]:
            if one not in found:
                found.append(one)
    return found
