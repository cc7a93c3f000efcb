-- The scoring functions pgad.train created; the lines below make dbt train the models first.
-- depends_on: {{ ref('house_prices') }}
-- depends_on: {{ ref('house_prices_by_region') }}
{{ config(materialized='table') }}

select
    id,
    region,
    price,
    pgad_models.house_prices(sqft, rooms) as predicted,
    pgad_models.house_prices_by_region(region, sqft, rooms) as predicted_by_region
from {{ ref('stg_houses') }}
