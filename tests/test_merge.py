"""Merging stacks: equivalence classes with rank ranges, the prefix tree, frame classes."""

from mldebug.analysis.frames import collective_op, is_user_frame, short_name, user_frame
from mldebug.analysis.merge import build_tree, group_stacks
from mldebug.model import STATE_STUCK, STATE_UNKNOWN, Frame
from mldebug.ranges import format_ranks

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
TRAIN = "/home/me/proj/train.py"

MODULE = Frame("<module>", TRAIN, 200)
MAIN = Frame("main", TRAIN, 180)
STEP = Frame("train_step", TRAIN, 120)
LOAD = Frame("load_batch", TRAIN, 90)
WRAPPER = Frame("_exception_logger.<locals>.wrapper", LOGGER, 83)
ALL_REDUCE = Frame("all_reduce", C10D, 3252)


def waiting_stack():
    return (MODULE, MAIN, STEP, WRAPPER, ALL_REDUCE)


def test_groups_carry_compact_ranges_biggest_first():
    stacks = {r: waiting_stack() for r in range(1024) if r != 512}
    stacks[512] = (MODULE, MAIN, LOAD)
    groups = group_stacks(stacks, {r: STATE_STUCK for r in stacks})
    assert format_ranks(groups[0].ranks) == "0-511,513-1023"
    assert groups[0].collective == "all_reduce" and groups[0].user_frame == STEP
    assert groups[0].state == STATE_STUCK
    assert groups[1].ranks == (512,) and groups[1].user_frame == LOAD
    assert groups[1].collective is None


def test_group_state_is_unknown_when_its_ranks_disagree():
    groups = group_stacks({0: (MODULE,), 1: (MODULE,)}, {0: STATE_STUCK, 1: "running"})
    assert groups[0].state == STATE_UNKNOWN


def test_tree_shares_prefixes_and_puts_ranks_on_every_node():
    stacks = {0: waiting_stack(), 1: waiting_stack(), 2: (MODULE, MAIN, LOAD), 3: waiting_stack()}
    tree = build_tree(group_stacks(stacks))
    assert tree.ranks == (0, 1, 2, 3)
    (module,) = tree.children
    (main,) = module.children
    assert main.ranks == (0, 1, 2, 3)
    step, load = main.children
    assert step.frame == STEP and step.ranks == (0, 1, 3)
    assert load.frame == LOAD and load.ranks == (2,)
    leaf = step.children[0].children[0]
    assert leaf.frame == ALL_REDUCE and leaf.ranks == (0, 1, 3) and leaf.children == ()


def test_same_function_on_different_lines_splits():
    a = (MODULE, Frame("main", TRAIN, 180))
    b = (MODULE, Frame("main", TRAIN, 181))
    groups = group_stacks({0: a, 1: b})
    assert len(groups) == 2
    assert len(build_tree(groups).children[0].children) == 2


def test_user_frames_exclude_stdlib_packages_torch_and_native():
    assert is_user_frame(Frame("f", "/home/me/proj/train.py", 1))
    assert is_user_frame(Frame("f", "<string>", 1))
    assert not is_user_frame(Frame("wait", "/usr/lib/python3.11/threading.py", 320))
    assert not is_user_frame(Frame("w", "/root/.pyenv/versions/3.11.7/lib/python3.11/queue.py", 1))
    assert not is_user_frame(Frame("f", "/venv/lib/python3.11/site-packages/numpy/x.py", 1))
    assert not is_user_frame(Frame("f", "/usr/lib/python3/dist-packages/y.py", 1))
    assert not is_user_frame(Frame("f", "/src/pytorch/torch/nn/modules/module.py", 1))
    assert not is_user_frame(Frame("poll", "/usr/lib/libc.so.6", None, native=True))
    assert not is_user_frame(Frame("f", "<frozen importlib._bootstrap>", 1))


def test_innermost_user_frame_skips_library_frames():
    assert user_frame(waiting_stack()) == STEP
    assert user_frame((Frame("wait", "/usr/lib/python3.11/threading.py", 1),)) is None


def test_collective_is_the_outermost_c10d_op():
    # all_gather_object calls all_gather inside: the user called all_gather_object.
    stack = (
        MODULE,
        STEP,
        Frame("all_gather_object", C10D, 2900),
        WRAPPER,
        Frame("all_gather", C10D, 4287),
    )
    assert collective_op(stack) == "all_gather_object"
    assert collective_op((MODULE, MAIN)) is None
    rendezvous = (
        MODULE,
        Frame("init_process_group", C10D, 1700),
        Frame(
            "_env_rendezvous_handler",
            "/venv/lib/python3.11/site-packages/torch/distributed/rendezvous.py",
            270,
        ),
    )
    assert collective_op(rendezvous) == "init_process_group"
    assert (
        collective_op(
            (MODULE, Frame("_create_c10d_store", "/x/torch/distributed/rendezvous.py", 1))
        )
        == "rendezvous"
    )


def test_qualified_names_compare_by_last_part():
    assert short_name("Thread.run") == "run"
    assert short_name("_exception_logger.<locals>.wrapper") == "wrapper"
    assert collective_op((Frame("ProcessGroup.barrier", C10D, 1),)) == "barrier"


def naive_tree(groups):
    """The prefix tree the plain way: every node keeps every rank through it, sorted."""
    nodes: dict[tuple, list[int]] = {(): []}
    for group in groups:
        path: tuple = ()
        nodes[path] += group.ranks
        for frame in group.frames:
            path = (*path, (frame.function, frame.file, frame.line))
            nodes.setdefault(path, []).extend(group.ranks)
    return {path: tuple(sorted(ranks)) for path, ranks in nodes.items()}


def flattened(node, path=(), into=None):
    into = {} if into is None else into
    into[path] = node.ranks
    for child in node.children:
        frame = child.frame
        flattened(child, (*path, (frame.function, frame.file, frame.line)), into)
    return into


def test_the_tree_grows_by_group_and_says_what_the_plain_tree_says():
    stacks = {r: waiting_stack() for r in range(4096)}
    for rank in (7, 700, 3001):
        stacks[rank] = (MODULE, MAIN, LOAD)
    stacks[12] = (MODULE, MAIN, STEP, Frame("barrier", C10D, 4700))
    groups = group_stacks(stacks)
    tree = build_tree(groups)
    assert flattened(tree) == naive_tree(groups)
    # along a stack's depth the nodes of one group hold one tuple of ranks, not a copy each
    step = next(c for c in tree.children[0].children[0].children if c.frame == STEP)
    waiting = next(c for c in step.children if c.frame == WRAPPER)
    assert waiting.ranks is waiting.children[0].ranks and len(waiting.ranks) == 4096 - 4
    # siblings come biggest first, then by their first rank
    assert [c.frame for c in tree.children[0].children[0].children] == [STEP, LOAD]
