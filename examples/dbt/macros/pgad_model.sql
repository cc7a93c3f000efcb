{#-
  materialized='pgad_model': a dbt model whose SELECT is the training data of a pgad model.

  The model belongs to the dbt target: its pgad name is "<schema>__<model>" (pgad_model_name: one name for each
  schema and model, never another's), the schema the dbt target builds the view in, so that a run in a dev schema
  never changes the model or the scoring function pgad_models."<schema>__<model>"(<group_by columns>, <the columns
  the model reads>) that a run in the production schema made. Downstream models call that function through
  {{ pgad_score('<model>') }}(...).

  The SELECT becomes a view named after the dbt model (what the model was trained on stays readable), then
  pgad.train fits the model on that view. As dbt's own view materialization does, the view is built under a
  temporary name and swapped in; the view and the training commit together, so a failed training leaves the
  previous view and model in place. Under `--empty` the SELECT is built and checked but nothing is trained: an
  existing view and model are left as they were.

  Config: model (the prediction lambda), loss and weights (a dict), required; any of pgad.train's options
  (pgad_train_options below), passed by name when set; or all of these in meta={'pgad': {...}}. A key that is
  neither dbt's nor pgad's is an error naming it. Every value reaches SQL as a quoted literal that PostgreSQL reads
  as the type of pgad.train's argument, never as SQL text. The final loss, and every NOTICE and WARNING of
  pgad.train, show in dbt's output.

  Each run that trains makes a new version of the model (pgad.train makes one per call); config deploy (true, the
  default, false or 'if_better') says whether it becomes the deployed one, which pgad_models."<schema>__<model>"
  scores by. The operations pgad_deploy and pgad_drop_model (macros/pgad_operations.sql) deploy another version
  or roll back, and drop one; dbt docs generate shows the deployed version's weights and metrics
  (macros/pgad_catalog.sql).
-#}

{#- pgad.train's arguments that a config may set: the one list to extend when pgad.train gains an option. -#}
{% macro pgad_train_options() -%}
  {{ return(['model', 'loss', 'weights', 'learning_rate', 'iterations', 'mode', 'backend', 'optimizer',
             'batch_size', 'seed', 'tolerance', 'l1', 'l2', 'regularize', 'standardize', 'label', 'group_by',
             'progress_every', 'dtype', 'validation', 'early_stopping', 'deploy',
             'impute']) }}
{%- endmacro %}

{#- dbt's own model configs (dbt-core's ModelConfig and dbt-postgres's PostgresConfig, at the versions pinned in
    pyproject.toml; tests/test_dbt.py checks the list against them). -#}
{% macro pgad_dbt_configs() -%}
  {{ return(['access', 'alias', 'batch_size', 'begin', 'column_types', 'concurrent_batches', 'contract', 'database',
             'docs', 'enabled', 'event_time', 'freshness', 'full_refresh', 'grants', 'group', 'incremental_strategy',
             'lookback', 'materialized', 'meta', 'on_configuration_change', 'on_schema_change', 'packages',
             'persist_docs', 'post-hook', 'pre-hook', 'quoting', 'schema', 'static_analysis', 'tags', 'unique_key',
             'indexes', 'unlogged']) }}
{%- endmacro %}

{% materialization pgad_model, adapter='postgres' %}

  {%- set existing_relation = load_cached_relation(this) -%}
  {%- set target_relation = this.incorporate(type='view') -%}
  {%- set intermediate_relation = make_intermediate_relation(target_relation) -%}
  {%- set preexisting_intermediate_relation = load_cached_relation(intermediate_relation) -%}
  {#- an old relation of another type (a table) is moved to the backup name and dropped, as dbt's view does -#}
  {%- set backup_relation_type = 'view' if existing_relation is none else existing_relation.type -%}
  {%- set backup_relation = make_backup_relation(target_relation, backup_relation_type) -%}
  {%- set preexisting_backup_relation = load_cached_relation(backup_relation) -%}
  {%- set grant_config = config.get('grants') -%}
  {%- set pgad_name = pgad_model_name(this) -%}
  {%- set empty = flags.EMPTY -%}

  {%- do pgad_check_config() -%}
  {%- set arguments = [
      ('name', pgad_literal(pgad_name)),
      ('model', pgad_literal(pgad_config('model', required=true))),
      ('loss', pgad_literal(pgad_config('loss', required=true))),
      ('data', pgad_literal(target_relation.include(database=false) | string)),
      ('weights', pgad_literal(pgad_config('weights', required=true))),
  ] -%}
  {%- for option in pgad_train_options() if option not in ('model', 'loss', 'weights') -%}
    {%- set value = pgad_config(option) -%}
    {%- if value is not none -%}
      {%- if option == 'group_by' and value is not string -%}{%- set value = value | join(', ') -%}{%- endif -%}
      {#- a boolean is typed, and so is deploy: true, false or 'if_better' ("any", no type to read a literal as) -#}
      {%- set type = '::pg_catalog.bool' if value is boolean
                     else ('::pg_catalog.text' if option == 'deploy' else '') -%}
      {%- do arguments.append((option, pgad_literal(value) ~ type)) -%}
    {%- endif -%}
  {%- endfor -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}

  {{ drop_relation_if_exists(preexisting_intermediate_relation) }}
  {{ drop_relation_if_exists(preexisting_backup_relation) }}

  -- `BEGIN` happens here:
  {{ run_hooks(pre_hooks, inside_transaction=True) }}

  {#- the view, through add_query for its connection: pgad.train's NOTICEs and WARNINGs arrive in its list -#}
  {%- set connection = adapter.add_query(get_create_view_as_sql(intermediate_relation, sql))[0] -%}

  {% if empty %}
    {#- --empty: the SELECT was built and checked; nothing is trained, and a view already there stays -#}
    {% if existing_relation is none %}
      {{ adapter.rename_relation(intermediate_relation, target_relation) }}
    {% else %}
      {{ adapter.drop_relation(intermediate_relation) }}
    {% endif %}
    {% call statement('main') -%}
      select
    {%- endcall %}
    {{ log('pgad model ' ~ pgad_name ~ ': not trained (--empty)', info=true) }}
  {% else %}
    {% if existing_relation is not none %}
      {% set existing_relation = load_cached_relation(existing_relation) %}
      {% if existing_relation is not none %}
        {{ adapter.rename_relation(existing_relation, backup_relation) }}
      {% endif %}
    {% endif %}
    {{ adapter.rename_relation(intermediate_relation, target_relation) }}

    {%- do connection.handle.notices.clear() if connection.handle is not none -%}
    {% call statement('main', fetch_result=True) -%}
      select name, group_key, final_loss, iterations, version, deployed from pgad.train(
        {%- for name, value in arguments %}
        {{ name }} => {{ value }}{{ ',' if not loop.last }}
        {%- endfor %}
      )
    {%- endcall %}

    {% for message in (connection.handle.notices if connection.handle is not none else []) %}
      {%- set message = message | trim -%}
      {% if message.startswith('WARNING') %}
        {% do exceptions.warn('pgad model ' ~ pgad_name ~ ': ' ~ message) %}
      {% else %}
        {{ log('pgad model ' ~ pgad_name ~ ': ' ~ message, info=true) }}
      {% endif %}
    {% endfor %}
    {% for row in load_result('main')['table'] %}
      {{ log('pgad model ' ~ row['name'] ~ (' ' ~ row['group_key'] if row['group_key'] else '') ~ ': final loss '
             ~ row['final_loss'] ~ ' after ' ~ row['iterations'] ~ ' iterations, version ' ~ row['version']
             ~ (', deployed' if row['deployed'] else ', not deployed'), info=true) }}
    {% endfor %}
  {% endif %}

  {% set should_revoke = should_revoke(existing_relation, full_refresh_mode=True) %}
  {% do apply_grants(target_relation, grant_config, should_revoke=should_revoke) %}

  {% do persist_docs(target_relation, model) %}

  {{ run_hooks(post_hooks, inside_transaction=True) }}

  -- `COMMIT` happens here
  {{ adapter.commit() }}

  {{ drop_relation_if_exists(backup_relation) }}

  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}

{% endmaterialization %}


{#- The pgad name of the model that a dbt model (a relation: this, or ref('<model>')) trains in its target:
    "<schema>__<model>", so that each target's schema has models and scoring functions of its own. The mapping is
    one-to-one: the schema is written (pgad_name_part) with no "__" in it and no "_" at its end, so the first "__" of
    a name is always the separator (schema a with model b__c is "a__b__c", schema a__b with model c "a$u_b__c").
    A name past 63 bytes is a compile error, never a name PostgreSQL truncates. -#}
{% macro pgad_model_name(relation) -%}
  {{ return(pgad_checked_name(pgad_name_part(relation.schema) ~ '__' ~ relation.identifier)) }}
{%- endmacro %}


{#- A schema's name as the pgad name writes it: itself when it has no "$", no "__" and no "_" at its end (dbt's
    usual schemas: analytics, dev_alice); else "$" is written "$$", and an "_" followed by "_" or at the end "$u". -#}
{% macro pgad_name_part(part) -%}
  {%- set out = namespace(text='') -%}
  {%- for c in part -%}
    {%- if c == '$' -%}
      {%- set out.text = out.text ~ '$$' -%}
    {%- elif c == '_' and (loop.last or part[loop.index] == '_') -%}
      {%- set out.text = out.text ~ '$u' -%}
    {%- else -%}
      {%- set out.text = out.text ~ c -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(out.text) }}
{%- endmacro %}


{#- name, unless it is longer than PostgreSQL's 63 bytes for a name: then a compile error. -#}
{% macro pgad_checked_name(name) -%}
  {%- if name.encode('utf-8') | length > 63 -%}
    {{ exceptions.raise_compiler_error("pgad model name '" ~ name ~ "' (<schema>__<model>) is longer than 63 "
                                       ~ "bytes, PostgreSQL's limit for the name of its scoring function: "
                                       ~ "shorten the schema or the model's name") }}
  {%- endif -%}
  {{ return(name) }}
{%- endmacro %}


{#- {{ pgad_score('house_prices') }}(sqft, rooms): the scoring function that the dbt model house_prices trained in
    this target, pgad_models."<schema>__house_prices", quoted; kind 'probability' or 'class' names the functions
    pgad.train makes beside it for a logistic, hinge or softmax model, 'mean' the one for a poisson or gamma model,
    'explain' every model's explanation. ref() makes the calling model depend on the training.
    Under --empty, before the target has the function, it stands in as a NULL of float8 (no row is read). -#}
{% macro pgad_score(model, kind=none) -%}
  {%- set relation = ref(model) if model is string else model -%}
  {%- set name = pgad_checked_name(pgad_model_name(relation) ~ ('_' ~ kind if kind else '')) -%}
  {%- set function = 'pgad_models."' ~ name.replace('"', '""') ~ '"' -%}
  {%- if execute and flags.EMPTY -%}
    {%- set found = run_query("select pg_catalog.count(*) from pg_catalog.pg_proc where pronamespace "
                              ~ "OPERATOR(pg_catalog.=) 'pgad_models'::pg_catalog.regnamespace and proname "
                              ~ "OPERATOR(pg_catalog.=) " ~ pgad_literal(name)).columns[0].values()[0] -%}
    {%- if found == 0 -%}
      {{- return('NULL::pg_catalog.float8 OPERATOR(pg_catalog.+) 0 OPERATOR(pg_catalog.*) pg_catalog.num_nonnulls') -}}
    {%- endif -%}
  {%- endif -%}
  {{- return(function) -}}
{%- endmacro %}


{#- Every config key of the model is dbt's or pgad's, and every key of meta.pgad is pgad's; else an error naming the
    key, and the nearest known key. -#}
{% macro pgad_check_config() -%}
  {%- set known = pgad_train_options() -%}
  {%- for where, keys, allowed in [('config', model.config.keys(), known + pgad_dbt_configs()),
                                    ("config meta['pgad']", ((model.config.get('meta') or {}).get('pgad') or {}).keys(), known)] -%}
    {%- for key in keys if key not in allowed -%}
      {%- set near = namespace(key=none, distance=3) -%}
      {%- for other in known -%}
        {%- set distance = pgad_distance(key, other) | int -%}
        {%- if distance < near.distance -%}{%- set near.key, near.distance = other, distance -%}{%- endif -%}
      {%- endfor -%}
      {{ exceptions.raise_compiler_error("materialized='pgad_model': unknown " ~ where ~ " key '" ~ key ~ "'"
          ~ (": did you mean '" ~ near.key ~ "'?" if near.key else '')
          ~ " pgad.train's options are " ~ known | join(', ') ~ "; other keys of your own go in meta") }}
    {%- endfor -%}
  {%- endfor -%}
{%- endmacro %}


{#- The edit distance (Levenshtein) between two strings. -#}
{% macro pgad_distance(a, b) -%}
  {%- set ns = namespace(previous=range(b | length + 1) | list) -%}
  {%- for i in range(a | length) -%}
    {%- set row = [i + 1] -%}
    {%- for j in range(b | length) -%}
      {%- do row.append([ns.previous[j + 1] + 1, row[j] + 1, ns.previous[j] + (0 if a[i] == b[j] else 1)] | min) -%}
    {%- endfor -%}
    {%- set ns.previous = row -%}
  {%- endfor -%}
  {{- return(ns.previous[-1]) -}}
{%- endmacro %}


{#- A config value of the model: config.<name>, else config.meta['pgad'].<name> (dbt asks custom keys to go in meta). -#}
{% macro pgad_config(name, required=false) -%}
  {%- set value = config.get(name) -%}
  {%- if value is none -%}
    {%- set value = ((config.get('meta') or {}).get('pgad') or {}).get(name) -%}
  {%- endif -%}
  {%- if value is none and required -%}
    {{ exceptions.raise_compiler_error("materialized='pgad_model' needs config '" ~ name ~ "' (see pgad's "
                                       ~ "examples/dbt/README.md)") }}
  {%- endif -%}
  {{ return(value) }}
{%- endmacro %}


{#- value as a PostgreSQL literal of unknown type, which PostgreSQL reads as the type of the argument it is passed
    to: its text quoted as quote_literal quotes it (quotes doubled; backslashes doubled behind E when there are any),
    so any value reads back as itself. A dict or list is written as JSON. -#}
{% macro pgad_literal(value) -%}
  {%- if value is boolean -%}
    {%- set text = 'true' if value else 'false' -%}
  {%- elif value is mapping or (value is iterable and value is not string) -%}
    {%- set text = tojson(value) -%}
  {%- else -%}
    {%- set text = value | string -%}
  {%- endif -%}
  {%- set quoted = "'" ~ text.replace("'", "''").replace('\\', '\\\\') ~ "'" -%}
  {{- ('E' if '\\' in text else '') ~ quoted -}}
{%- endmacro %}
