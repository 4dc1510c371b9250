"""Every file the toolkit reads or writes goes through this module: one helper per kind of file.

- :func:`read_yaml` / :func:`parse_yaml`: the one YAML loader (safe; refuses repeated keys, anchors and aliases).
- :func:`read_json`: JSON files the toolkit wrote (manifests, fingerprints, export metadata).
- :func:`read_safetensors` / :func:`read_checkpoint`: tensors (``torch.load(weights_only=True)``).
- :func:`prepare_output_path` / :func:`prepare_output_dir`: check an output location is writable before any work.
- :func:`check_output_dir` / :func:`claim_output_dir`: a directory is only written into when it is new, empty or one
  of this toolkit's outputs of the same kind (its record file says so); :class:`DirectoryLock`: one writer at a time;
  :func:`remove_stale_temporaries`: what a killed process left behind.
- :func:`write_atomic` / :func:`write_json_atomic` / :func:`write_yaml_atomic`: a reader sees the old file or the
  new one, never half of one.
- :func:`file_digest` / :func:`tree_digest`: SHA-256 of a file's or a directory's bytes (buffered reads), the
  digests that exports and tokenized-split cache entries record of their parts.
- :func:`split_lines`, :func:`parse_decimal`, :func:`parse_integer`, :func:`quote_prefix`: the one rule for where a
  line of a data file ends, the number grammar of labels and scores, and how messages quote file content.

Every failure is a :class:`~mtdnn.errors.UserError` naming the file (exit code 2, no traceback). A test
(``tests/test_fileio.py``) fails if a module of ``mtdnn/`` reads or writes such files any other way.
The lowest layer of the package (beside :mod:`mtdnn.errors`): every stage may import it. One module per job:
:mod:`.reading`, :mod:`.writing`, :mod:`.outputs` (output locations and owned directories), :mod:`.digests`,
:mod:`.text` (line ends, numbers, quoting); every helper is importable from here.
"""

from .digests import file_digest, file_digests, tree_digest  # noqa: F401
from .outputs import (  # noqa: F401
    LOCK_FILE,
    NAME_MAX,
    OUTPUT_KINDS,
    OUTPUT_RECORD,
    TEMPORARY,
    TEMPORARY_DIR,
    DirectoryLock,
    check_name_lengths,
    check_output_dir,
    claim_output_dir,
    output_record,
    prepare_output_dir,
    prepare_output_path,
    remove_stale_temporaries,
)
from .reading import check_zip_crc, parse_yaml, read_checkpoint, read_json, read_safetensors, read_yaml, yaml_float  # noqa: F401
from .text import (  # noqa: F401
    LINE_END,
    NUMBER_GRAMMAR,
    parse_decimal,
    parse_integer,
    quote_names,
    quote_prefix,
    split_lines,
    undecodable_at,
)
from .writing import (  # noqa: F401
    append_lines,
    default_mode,
    dump_yaml,
    make_dir,
    temporary_prefix,
    write_atomic,
    write_json_atomic,
    write_torch_atomic,
    write_yaml_atomic,
)
