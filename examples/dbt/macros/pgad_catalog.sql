{#-
  dbt docs generate: the catalog of a pgad_model's view carries the deployed version of the model it trains in its
  target, as the view's statistics (catalog.json's "stats", the "Details" of the docs site): the pgad name, the
  deployed version and how many versions are kept, the weights, the final loss, the iterations, whether the fit
  converged, the loss on the validation rows and the metrics there (with validation), when it was trained. A model
  with group_by shows a JSON object by group ("east": …). They are read when the docs are generated, from
  pgad.models and pgad.model_versions as the dbt role, under their policy (a role sees only the models whose data it
  may read), so a pgad_deploy or a rollback shows at the next dbt docs generate.

  These are dbt-postgres's postgres__get_catalog_relations and postgres__get_catalog (at the version pyproject.toml
  pins; tests/test_dbt.py checks every line of its query is here) with the pgad_stats columns added; in a database
  without pgad they are dbt-postgres's.
-#}

{% macro postgres__get_catalog_relations(information_schema, relations) -%}
  {%- set pgad = run_query("select pg_catalog.to_regclass('pgad.model_versions') is not null")
                  .columns[0].values()[0] -%}
  {%- call statement('catalog', fetch_result=True) -%}

    {#
      If the user has multiple databases set and the first one is wrong, this will fail.
      But we won't fail in the case where there are multiple quoting-difference-only dbs, which is better.
    #}
    {% set database = information_schema.database %}
    {{ adapter.verify_database(database) }}

    {% if pgad %}{{ pgad_stats_query() }}{% endif %}
    select
        '{{ database }}' as table_database,
        sch.nspname as table_schema,
        tbl.relname as table_name,
        case tbl.relkind
            when 'v' then 'VIEW'
            when 'm' then 'MATERIALIZED VIEW'
            else 'BASE TABLE'
        end as table_type,
        tbl_desc.description as table_comment,
        col.attname as column_name,
        col.attnum as column_index,
        pg_catalog.format_type(col.atttypid, col.atttypmod) as column_type,
        col_desc.description as column_comment,
        pg_get_userbyid(tbl.relowner) as table_owner
        {%- if pgad %}{{ pgad_stats_columns() }}{% endif %}

    from pg_catalog.pg_namespace sch
    join pg_catalog.pg_class tbl on tbl.relnamespace = sch.oid
    join pg_catalog.pg_attribute col on col.attrelid = tbl.oid
    left outer join pg_catalog.pg_description tbl_desc on (tbl_desc.objoid = tbl.oid and tbl_desc.objsubid = 0)
    left outer join pg_catalog.pg_description col_desc on (col_desc.objoid = tbl.oid and col_desc.objsubid = col.attnum)
    {%- if pgad %}
    left outer join pgad_stats
        on (tbl.relkind = 'v' and pgad_stats.name = {{ pgad_stats_name('sch.nspname', 'tbl.relname') }})
    {%- endif %}
    where (
      {%- for relation in relations -%}
        {%- if relation.identifier -%}
          (upper(sch.nspname) = upper('{{ relation.schema }}') and
           upper(tbl.relname) = upper('{{ relation.identifier }}'))
        {%- else-%}
          upper(sch.nspname) = upper('{{ relation.schema }}')
        {%- endif -%}
        {%- if not loop.last %} or {% endif -%}
      {%- endfor -%}
    )
      and not pg_is_other_temp_schema(sch.oid) -- not a temporary schema belonging to another session
      and tbl.relpersistence in ('p', 'u') -- [p]ermanent table or [u]nlogged table. Exclude [t]emporary tables
      and tbl.relkind in ('r', 'v', 'f', 'p', 'm') -- o[r]dinary table, [v]iew, [f]oreign table, [p]artitioned table, [m]aterialized view. Other values are [i]ndex, [S]equence, [c]omposite type, [t]OAST table
      and col.attnum > 0 -- negative numbers are used for system columns such as oid
      and not col.attisdropped -- column as not been dropped

    order by
        sch.nspname,
        tbl.relname,
        col.attnum

  {%- endcall -%}

  {{ return(load_result('catalog').table) }}
{%- endmacro %}


{% macro postgres__get_catalog(information_schema, schemas) -%}
  {%- set relations = [] -%}
  {%- for schema in schemas -%}
    {%- set dummy = relations.append({'schema': schema}) -%}
  {%- endfor -%}
  {{ return(postgres__get_catalog_relations(information_schema, relations)) }}
{%- endmacro %}


{#- The statistics shown, (key, label, description, the SQL of its value from the deployed rows m of one model),
    each value text: the rows' own for a model without groups, else a JSON object of them by group (the group's
    values, joined by ', '). (dbt reads a column of numbers as numbers: a count or a version is in words.) -#}
{% macro pgad_stats() -%}
  {{ return([
    ('pgad_model', 'pgad model', 'the name of the pgad model this view trained: pgad.models, pgad_models."<name>"',
     'pg_catalog.min(m.name)'),
    ('pgad_version', 'Deployed version', 'the version that pgad_models."<name>" scores by, of the versions kept in '
     ~ 'pgad.model_versions (pgad_deploy deploys another)',
     "case when pg_catalog.min(m.version) = pg_catalog.max(m.version) then pg_catalog.min(m.version)::pg_catalog.text "
     ~ "else " ~ pgad_by_group('m.version') ~ " end || ' (versions kept: ' || (select pg_catalog.string_agg("
     ~ "v.version::pg_catalog.text, ', ' order by v.version) from (select distinct v.version from "
     ~ "pgad.model_versions v where v.name = m.name) v) || ')'"),
    ('pgad_weights', 'Weights', 'the fitted weights of the deployed version', pgad_by_group('m.weights')),
    ('pgad_final_loss', 'Final loss', 'the objective at the weights: the mean loss plus the regularisation',
     pgad_by_group('m.final_loss')),
    ('pgad_fit', 'Fit', 'whether the fit met the convergence criterion, and the iterations it ran',
     pgad_by_group("case when m.converged then 'converged' when not m.converged then 'did not converge' else "
                   ~ "'convergence not recorded' end || ' after ' || m.iterations || ' iterations'")),
    ('pgad_validation_loss', 'Validation loss', 'the loss on the validation rows after the last iteration',
     pgad_by_group('m.validation_history[pg_catalog.array_upper(m.validation_history, 1)]')),
    ('pgad_metrics', 'Validation metrics', 'the metrics of the deployed version on its validation rows',
     pgad_by_group('m.metrics')),
    ('pgad_trained_at', 'Trained at', 'when the deployed version was trained',
     'pg_catalog.max(m.trained_at)::pg_catalog.text'),
  ]) }}
{%- endmacro %}


{#- The SQL of a value of the deployed rows m of one model as text: the value itself without groups, else a JSON
    object by group; NULL where every row's is NULL. (Every aggregate of a CASE is computed: the key of the object
    is '' without groups, never NULL.) -#}
{% macro pgad_by_group(value) -%}
  {{ return('case when pg_catalog.bool_and(' ~ value ~ ' is null) then null when pg_catalog.bool_and(m.group_key '
            ~ 'is null) then pg_catalog.min(' ~ value ~ '::pg_catalog.text) else pg_catalog.jsonb_object_agg('
            ~ 'coalesce((select pg_catalog.string_agg(g.value, \', \') from '
            ~ 'pg_catalog.jsonb_each_text(m.group_key) g), \'\'), '
            ~ 'pg_catalog.to_jsonb(' ~ value ~ '))::pg_catalog.text end') }}
{%- endmacro %}


{#- pgad_stats, a CTE of one row per deployed model the dbt role may read. -#}
{% macro pgad_stats_query() -%}
    with pgad_stats as (
        select m.name
        {%- for key, label, description, value in pgad_stats() %},
            {{ value }} as {{ key }}
        {%- endfor %}
        from pgad.models m
        group by m.name
    )
{%- endmacro %}


{#- The catalog's columns of the statistics, from pgad_stats: dbt reads "stats:<key>:<label|value|description|include>"
    from a relation's first row, and shows those whose include is true. -#}
{% macro pgad_stats_columns() -%}
  {%- for key, label, description, value in pgad_stats() %},
        {{ pgad_literal(label) }}::text as "stats:{{ key }}:label",
        pgad_stats.{{ key }} as "stats:{{ key }}:value",
        {{ pgad_literal(description) }}::text as "stats:{{ key }}:description",
        pgad_stats.{{ key }} is not null as "stats:{{ key }}:include"
  {%- endfor -%}
{%- endmacro %}


{#- The SQL of the pgad name that the dbt model of view <schema>.<view> trains: pgad_model_name's mapping, in SQL
    ("$" written "$$", an "_" before an "_" or at the end "$u"). -#}
{% macro pgad_stats_name(schema, view) -%}
  {{- "pg_catalog.regexp_replace(pg_catalog.replace(" ~ schema ~ ", '$', '$$'), '_(?=_|$)', '$u', 'g') "
      ~ "operator(pg_catalog.||) '__' operator(pg_catalog.||) " ~ view -}}
{%- endmacro %}
