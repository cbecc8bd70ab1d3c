import pytest
from tui_fakes import FakePoller


@pytest.fixture
def poller():
    return FakePoller()
