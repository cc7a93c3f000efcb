{#-
  Operations on the versions of a pgad_model, in the target dbt runs them in:

    dbt run-operation pgad_deploy --args '{name: house_prices, strategy: previous}' --target prod
    dbt run-operation pgad_deploy --args '{name: house_prices, version: 3}'
    dbt run-operation pgad_drop_model --args '{name: house_prices, version: 1}'

  name is the dbt model's name; the operation acts on the pgad model that model trains in the target,
  "<schema>__<model>" (pgad_model_name), never on another target's. pgad_deploy calls pgad.deploy: version (a
  number) or strategy ('best_validation', 'most_recent' or 'previous', the rollback) picks the version whose
  functions pgad_models."<schema>__<model>" (and its _probability, _class, …) then score by, so the views on them
  follow; pgad_drop_model calls pgad.drop_model(name, version), which drops a version that is not deployed. Each
  commits what it did, and logs it; an error of pgad's fails the operation and changes nothing.
-#}

{% macro pgad_deploy(name, version=none, strategy=none) -%}
  {%- set pgad_name = pgad_operation_name(name) -%}
  {%- call statement('pgad_deploy', fetch_result=True, auto_begin=True) -%}
    select name, group_key, version from pgad.deploy(name => {{ pgad_literal(pgad_name) }},
      version => {{ pgad_operation_literal(version) }}, strategy => {{ pgad_operation_literal(strategy) }})
  {%- endcall -%}
  {%- do adapter.commit() -%}
  {%- for row in load_result('pgad_deploy')['table'] -%}
    {{ log('pgad model ' ~ row['name'] ~ (' ' ~ row['group_key'] if row['group_key'] else '') ~ ': version '
           ~ row['version'] ~ ' deployed', info=true) }}
  {%- endfor -%}
{%- endmacro %}


{% macro pgad_drop_model(name, version) -%}
  {%- set pgad_name = pgad_operation_name(name) -%}
  {%- call statement('pgad_drop_model', auto_begin=True) -%}
    select pgad.drop_model(name => {{ pgad_literal(pgad_name) }}, version => {{ pgad_literal(version) }})
  {%- endcall -%}
  {%- do adapter.commit() -%}
  {{ log('pgad model ' ~ pgad_name ~ ': version ' ~ version ~ ' dropped', info=true) }}
{%- endmacro %}


{#- The pgad name of the model that the project's dbt model `name` (materialized='pgad_model') trains in this
    target; a compile error for any other name. -#}
{% macro pgad_operation_name(name) -%}
  {%- set found = [] -%}
  {%- for node in graph.nodes.values() if node.resource_type == 'model' and node.name == name | string
                                          and node.config.materialized == 'pgad_model' -%}
    {%- do found.append(node) -%}
  {%- endfor -%}
  {%- if found | length != 1 -%}
    {{ exceptions.raise_compiler_error("no dbt model '" ~ name ~ "' with materialized='pgad_model' in this "
                                       ~ "project (the name of the model's file, without .sql)") }}
  {%- endif -%}
  {%- set node = found[0] -%}
  {{ return(pgad_model_name(api.Relation.create(database=node.database, schema=node.schema,
                                                identifier=node.alias))) }}
{%- endmacro %}


{#- value as pgad_literal writes it, or NULL. -#}
{% macro pgad_operation_literal(value) -%}
  {{- 'NULL' if value is none else pgad_literal(value) -}}
{%- endmacro %}
