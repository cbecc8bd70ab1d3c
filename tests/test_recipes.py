from mldebug import model
from mldebug.cli import main
from mldebug.recipes import get_recipe, load_recipes, parse_recipe

# The recipe each finding kind points to; a finding must never point at nothing.
FINDING_RECIPES = {
    model.KIND_OUTLIER: "rank-outside-collective",
    model.KIND_MISMATCH: "mismatched-collectives",
    model.KIND_MISSING: "missing-ranks",
    model.KIND_RENDEZVOUS: "rendezvous-hang",
    model.KIND_HANG: "collective-hang",
    model.KIND_UNREADABLE: "ptrace-permission",
    model.KIND_THREADS: "missing-thread",
    model.KIND_NONFINITE: "nonfinite-origin",
    model.KIND_MEMORY_GROWTH: "memory-growth",
    model.KIND_MEMORY_OUTLIER: "memory-growth",
}


def test_every_finding_recipe_ships():
    for recipe_id in [*FINDING_RECIPES.values(), "rank-crash"]:
        recipe = get_recipe(recipe_id)
        assert recipe is not None, recipe_id
        assert recipe.title and recipe.symptom and recipe.body.startswith("# ")


def test_recipe_ids_are_unique():
    ids = [recipe.id for recipe in load_recipes()]
    assert len(ids) == len(set(ids))


def test_front_matter_is_optional_and_tolerant():
    plain = parse_recipe("# Just markdown\n\ntext", fallback_id="plain")
    assert (plain.id, plain.title, plain.body) == ("plain", "plain", "# Just markdown\n\ntext")
    unterminated = parse_recipe("---\nid: x\n# body", fallback_id="f")
    assert unterminated.id == "f"
    full = parse_recipe("---\nid: a\ntitle: T: with colon\nsymptom: s\n---\n\nbody\n")
    assert (full.id, full.title, full.symptom, full.body) == ("a", "T: with colon", "s", "body")


def test_recipes_command_lists_and_prints(capsys):
    assert main(["recipes"]) == 0
    listing = capsys.readouterr().out
    assert "collective-hang" in listing and "Every rank waits" in listing
    assert main(["recipes", "missing-ranks"]) == 0
    assert capsys.readouterr().out.startswith("# Some ranks are not there")
    assert main(["recipes", "no-such-recipe"]) == 3
    assert "Known recipes" in capsys.readouterr().err
