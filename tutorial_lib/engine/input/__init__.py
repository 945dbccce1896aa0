"""The input pipelines: from image files on disk to normalised float32 batches on the training device.

* :mod:`.folders`: data folders on disk (digits export, the ImageFolder layout check, ``DataError``)
* :mod:`.files`: the file list and the rules both pipelines share (unreadable files, pixel limit,
  validation resize, normalisation on the device, ``Batch``)
* :mod:`.samplers`: which images each rank reads (``ShardSampler``, ``SkipFirst``)
* :mod:`.draws`: the training crops and flips, drawn from (seed, epoch, index) (both pipelines)
* :mod:`.cpu`: the CPU pipeline (workers decode and augment, ship uint8)
* :mod:`.jpeg`, :mod:`.resample`, :mod:`.gpu`: the GPU pipeline (workers read bytes and JPEG headers;
  the device decodes, crops, resizes and flips in batches)
* :mod:`.loaders`: ``loaders_for``, the one entry point the trainer and the benchmarks use
"""
