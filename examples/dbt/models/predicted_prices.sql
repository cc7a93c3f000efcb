-- A view of every house's predicted price: it calls the model's function, pgad_models."<schema>__house_prices",
-- which scores by the deployed version, so a dbt run that deploys a new version, and a pgad_deploy (a rollback
-- included), change what it returns without rebuilding it.
{{ config(materialized='view') }}

select id, {{ pgad_score('house_prices') }}(sqft, rooms) as predicted
from {{ ref('stg_houses') }}
