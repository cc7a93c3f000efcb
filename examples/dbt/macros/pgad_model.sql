{#-
  materialized='pgad_model': a dbt model whose SELECT is the training data of a pgad model.

  The SELECT becomes a view named after the dbt model (what the model was trained on stays readable), then
  pgad.train fits the model on that view: it stores the fit in pgad.models under the dbt model's name and creates the
  scoring function pgad_models."<name>"(<group_by columns>, <the columns the model reads>), which downstream models
  call. As dbt's own view materialization does, the view is built under a temporary name and swapped in; the view
  and the training commit together, so a failed training leaves the previous view and model in place.

  Config: model (the prediction lambda), loss and weights (a dict), required; any of pgad.train's options (train_options below),
  passed by name when set. A key may also sit in the config's meta. Every value reaches SQL as a quoted literal cast
  to its argument's type, never as SQL text.
-#}

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

  {#- pgad.train's options, and the types of their arguments -#}
  {%- set train_options = {
      'learning_rate': 'float8', 'iterations': 'int4', 'mode': 'text', 'backend': 'text', 'optimizer': 'text',
      'batch_size': 'int4', 'seed': 'int8', 'tolerance': 'float8', 'l1': 'float8', 'l2': 'float8',
      'regularize': 'jsonb', 'standardize': 'bool', 'label': 'text', 'group_by': 'text', 'progress_every': 'int4',
  } -%}

  {%- set arguments = [
      ('name', pgad_literal(this.identifier, 'text')),
      ('model', pgad_literal(pgad_config('model', required=true), 'text')),
      ('loss', pgad_literal(pgad_config('loss', required=true), 'text')),
      ('data', pgad_literal(target_relation.include(database=false) | string, 'text')),
      ('weights', pgad_literal(pgad_config('weights', required=true), 'jsonb')),
  ] -%}
  {%- for option, type in train_options.items() -%}
    {%- set value = pgad_config(option) -%}
    {%- if value is not none -%}
      {%- if option == 'group_by' and value is not string -%}{%- set value = value | join(', ') -%}{%- endif -%}
      {%- do arguments.append((option, pgad_literal(value, type))) -%}
    {%- endif -%}
  {%- endfor -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}

  {{ drop_relation_if_exists(preexisting_intermediate_relation) }}
  {{ drop_relation_if_exists(preexisting_backup_relation) }}

  -- `BEGIN` happens here:
  {{ run_hooks(pre_hooks, inside_transaction=True) }}

  {% call statement('training_data') -%}
    {{ get_create_view_as_sql(intermediate_relation, sql) }}
  {%- endcall %}

  {% if existing_relation is not none %}
    {% set existing_relation = load_cached_relation(existing_relation) %}
    {% if existing_relation is not none %}
      {{ adapter.rename_relation(existing_relation, backup_relation) }}
    {% endif %}
  {% endif %}
  {{ adapter.rename_relation(intermediate_relation, target_relation) }}

  {% call statement('main', fetch_result=True) -%}
    select name, group_key, final_loss, iterations from pgad.train(
      {%- for name, value in arguments %}
      {{ name }} => {{ value }}{{ ',' if not loop.last }}
      {%- endfor %}
    )
  {%- endcall %}

  {% for row in load_result('main')['table'] %}
    {{ log('pgad model ' ~ row['name'] ~ (' ' ~ row['group_key'] if row['group_key'] else '') ~ ': final loss '
           ~ row['final_loss'] ~ ' after ' ~ row['iterations'] ~ ' iterations') }}
  {% endfor %}

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


{#- A config value of the model: config.<name>, else config.meta.<name> (where dbt asks custom keys to go). -#}
{% macro pgad_config(name, required=false) -%}
  {%- set value = config.get(name) -%}
  {%- if value is none -%}
    {%- set value = (config.get('meta') or {}).get(name) -%}
  {%- endif -%}
  {%- if value is none and required -%}
    {{ exceptions.raise_compiler_error("materialized='pgad_model' needs config '" ~ name ~ "' (see pgad's "
                                       ~ "examples/dbt/README.md)") }}
  {%- endif -%}
  {{ return(value) }}
{%- endmacro %}


{#- value as a PostgreSQL literal of type pg_catalog.<type>: its text quoted as quote_literal quotes it (quotes
    doubled; backslashes doubled behind E when there are any), so any value reads back as itself. A dict or list is
    written as JSON. -#}
{% macro pgad_literal(value, type) -%}
  {%- if value is boolean -%}
    {%- set text = 'true' if value else 'false' -%}
  {%- elif value is mapping or (value is iterable and value is not string) -%}
    {%- set text = tojson(value) -%}
  {%- else -%}
    {%- set text = value | string -%}
  {%- endif -%}
  {%- set quoted = "'" ~ text.replace("'", "''").replace('\\', '\\\\') ~ "'" -%}
  {{- ('E' if '\\' in text else '') ~ quoted ~ '::pg_catalog.' ~ type -}}
{%- endmacro %}
