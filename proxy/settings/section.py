"""The building blocks every settings section uses. A leaf: it imports nothing of
`proxy`, so that any package's own settings (`proxy.settings.memory`) can use it without
importing the settings model that gathers them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

APP_NAME = "recap-proxy"

# A path from the user: `~` means their home, wherever it is written.
UserPath = Annotated[Path, AfterValidator(Path.expanduser)]


class Section(BaseModel):
    """A settings section: unknown keys are errors (they name the key), defaults validated."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
