"""ImageNet as users have it, turned into the class-folder form the trainer reads.

``python -m tutorial_lib.data prepare SOURCE DEST`` recognises the original ILSVRC2012 archives, the
Kaggle layout, class folders with a flat ``val/`` plus a ground-truth file, and class folders for
both splits, and writes ``DEST/{train,val}/<wnid>/<image>`` without changing anything under SOURCE.

* :mod:`.layouts`: which form a folder holds, and the validation ground truth of each form.
* :mod:`.prepare`: links (unpacked sources) or resumable extraction (archives), counts checked.

This package sits below ``engine`` (the trainer names :data:`PREPARE_COMMAND` in its refusals) and
imports nothing else from the project.
"""

PREPARE_COMMAND = "python -m tutorial_lib.data prepare SOURCE DEST"


class PrepareError(ValueError):
    """A source or destination folder that cannot be prepared; the message names the field and the fix."""
