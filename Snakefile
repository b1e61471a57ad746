# The workflow: corpus -> training runs -> scores -> tidy tables -> one papermill notebook per figure/table.
# Everything configurable lives in config/ (validated against config/schema.yaml); what the config implies
# (runs, names, steps, groups, pretrained sources, notebook I/O) is computed by attention_geometry.workflow.plan,
# and rules/common.smk only looks it up.
import os
import sys

from snakemake.utils import min_version, validate

# The workflow runs its own checkout's package: src/ first on the import path, so the parse needs no
# installed package (an environment with Snakemake only, as the catalog's --sdm conda usage has, parses it;
# every job puts the same src/ on PYTHONPATH: workflow.plan.shell_prefix). The parse imports only
# attention_geometry's torch-free workflow modules and PyYAML, which Snakemake itself depends on.
sys.path.insert(0, os.path.join(workflow.basedir, "src"))

min_version("9.0")


# The embedded default, unless a complete config is given with --configfile (config/paper.yaml,
# config/smoke.yaml): configs are never merged into each other.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"



# A config that fails the schema stops with one line naming the key (attention_geometry.workflow.plan.schema_error),
# not with Snakemake's message, which prints the whole schema and config after it. validate() also sets the
# schema's defaults.
# Every stop at parse time is its one line (workflow.jobs.stop), without Snakemake's WorkflowError frame.
from snakemake.exceptions import WorkflowError

from attention_geometry.formats.files import yaml_size_error
from attention_geometry.workflow.jobs import stop
from attention_geometry.workflow.plan import schema_error

# a config whose YAML aliases expand to millions of values stops here, before the schema check walks it
if (_bomb := yaml_size_error(config, "config")) is not None:
    stop(_bomb)
try:
    validate(config, "config/schema.yaml")
except WorkflowError:
    stop(
        schema_error(config, os.path.join(workflow.basedir, "config", "schema.yaml"))
        or "config: does not match config/schema.yaml"
    )


# `snakemake --report results/report.html`: this description, then every figure and table with its committed
# caption (report/captions/, one per entry of notebooks/catalog.yaml).
report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/score.smk"
include: "rules/figures.smk"


rule all:
    default_target: True
    input:
        all_targets(),
