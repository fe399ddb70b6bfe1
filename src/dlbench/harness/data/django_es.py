"""django-es-en: Spanish->English pairs from the Spanish translation catalogues shipped in Django's wheel.

Each gettext entry of Django's `locale/es/LC_MESSAGES/*.po` files pairs an English message (msgid) with
its Spanish translation (msgstr), written by Django's translators. The wheel is downloaded from PyPI
and read as an archive, never installed; the .po files are parsed by polib.
"""

from __future__ import annotations

import re
from pathlib import Path

from .download import Source
from .manythings import encode_pairs, normalise
from .prepared import Built, DatasetError, StandInTarget
from .wheel import members, pypi_wheel, read_member

NAME = "django-es-en"
WHEEL = pypi_wheel(
    "django-5.2.19-py3-none-any.whl",
    "3c/fb/65b4e897d1268288a46457493d9aec6541be8be08e0093a93cc101c03ab2/django-5.2.19-py3-none-any.whl",
    8319631, "5965d974a5218a2b68a11dd1276434707f23886525c23f0598eccedaf4f4ca00",
)
CATALOGUE = re.compile(r"django/(?:.+/)?locale/es/LC_MESSAGES/django(?:js)?\.po")
# printf and format placeholders (%(name)s, %s, {name}) are code, not language: removed before normalising.
PLACEHOLDER = re.compile(r"%\([^)]*\)[a-z]|%[a-z]|\{[^}]*\}")
MAX_TOKENS = 12  # <start> + up to 10 words + <end>, on each side; longer messages are help texts
MIN_PAIRS = 100


def catalogue_pairs(text: str, where: str) -> list[tuple[str, str]]:
    """(English, Spanish) of every translated, non-fuzzy entry; plurals give their singular forms."""
    import polib  # imported here: only preparation needs it

    try:
        catalogue = polib.pofile(text)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{where}: not a gettext catalogue: {exc}") from None
    pairs = []
    for entry in catalogue:
        if entry.obsolete or "fuzzy" in entry.flags:
            continue
        spanish = entry.msgstr_plural.get(0, "") if entry.msgid_plural else entry.msgstr
        if spanish:
            pairs.append((entry.msgid, spanish))
    return pairs


def read_pairs(wheel: Path) -> tuple[list[list[str]], list[list[str]]]:
    """Normalised (Spanish, English) token lists, distinct, at most MAX_TOKENS each, in catalogue order."""
    names = sorted(name for name in members(wheel) if CATALOGUE.fullmatch(name))
    seen, spanish, english = set(), [], []
    for name in names:
        text = read_member(wheel, name).decode("utf-8")
        for source_text, target_text in catalogue_pairs(text, f"{wheel}!{name}"):
            eng = normalise(PLACEHOLDER.sub(" ", source_text))
            spa = normalise(PLACEHOLDER.sub(" ", target_text))
            key = (tuple(spa), tuple(eng))
            if min(len(eng), len(spa)) < 3 or max(len(eng), len(spa)) > MAX_TOKENS or key in seen:
                continue
            seen.add(key)
            spanish.append(spa)
            english.append(eng)
    if len(spanish) < MIN_PAIRS:
        raise DatasetError(f"{wheel}: {len(spanish)} usable pairs in {len(names)} Spanish catalogues; "
                           f"at least {MIN_PAIRS} are needed")
    return spanish, english


def build(paths: dict[str, Path], work: Path) -> Built:
    spanish, english = read_pairs(paths[WHEEL.name])
    return encode_pairs(spanish, english, DJANGO_ES_EN.info)


DJANGO_ES_EN = Source(
    info={
        "name": NAME, "task": "translation",
        "description": (
            "Spanish->English pairs from the 13 Spanish gettext catalogues (django.po and djangojs.po under "
            "locale/es/LC_MESSAGES) of Django 5.2.19: each translated entry's English msgid and Spanish msgstr "
            "(fuzzy and obsolete entries skipped; a plural entry gives its singular forms), in file order. "
            "Placeholders (%(name)s, %s, {name}) removed, then each side normalised exactly as the manythings "
            f"dataset is (lower-cased, accents stripped, punctuation spaced, <start> ... <end>); pairs with a "
            f"side left empty, or over {MAX_TOKENS} tokens (help texts), and repeated pairs dropped. "
            "Split 80/20 by a seed-0 permutation, vocabularies and arrays laid out as manythings'. Short user-"
            "interface messages ('This field is required.', 'Delete selected users'): a small offline stand-in "
            "for quick runs of seq2seq-manythings. This is NOT the Anki spa-eng corpus the study uses, and its "
            "accuracies are not comparable with it."
        ),
        "source": "Django 5.2.19's wheel on PyPI, django/**/locale/es/LC_MESSAGES/*.po (Django's translators)",
        "licence": "BSD-3-Clause (Django, translations included)",
    },
    files=(WHEEL,), build=build,
    targets={"seq2seq-manythings": StandInTarget(None, (
        "its token accuracy stays flat at 25 to 27 % over the quick suite's epochs (the same for every "
        "framework in make run's store, lr 1e-4 on 528 pairs): no target would separate anything"))},
)
