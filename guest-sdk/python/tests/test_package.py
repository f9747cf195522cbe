import unittest
from pathlib import Path

import tests.support  # noqa: F401  (the SDK on the path)

import subs_sdk
from subs_sdk import agent, protocol, testing, tools

PACKAGE = Path(subs_sdk.__file__).parent


class PackageTests(unittest.TestCase):
    def test_all_names_every_public_name_once(self):
        self.assertEqual(len(subs_sdk.__all__), len(set(subs_sdk.__all__)))
        missing = [n for n in subs_sdk.__all__ if not hasattr(subs_sdk, n)]
        self.assertEqual(missing, [])
        for module in (protocol, testing):
            self.assertEqual(set(module.__all__) - set(subs_sdk.__all__), set(), module.__name__)
        for name in ("Agent", "Context", "DecideError", "Host", "Level"):
            self.assertIs(getattr(subs_sdk, name), getattr(agent, name))
        for name in ("Tool", "ToolRouter", "tool", "schema_of"):
            self.assertIs(getattr(subs_sdk, name), getattr(tools, name))

    def test_the_package_ships_its_types(self):
        self.assertTrue((PACKAGE / "py.typed").is_file())
        # Read as text: tomllib is not in every Python 3 the tests run on.
        pyproject = (PACKAGE.parents[1] / "pyproject.toml").read_text(encoding="utf-8")
        self.assertIn('[tool.setuptools.package-data]\nsubs_sdk = ["py.typed"]', pyproject)
        self.assertIn("[tool.mypy]\nstrict = true", pyproject)
