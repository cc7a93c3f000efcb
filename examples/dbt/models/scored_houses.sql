-- Every house with the two models' predictions: pgad_score names the scoring function that this target's run
-- trained (and makes dbt train it first).
{{ config(materialized='table') }}

select
    id,
    region,
    price,
    {{ pgad_score('house_prices') }}(sqft, rooms) as predicted,
    {{ pgad_score('house_prices_by_region') }}(region, sqft, rooms) as predicted_by_region
from {{ ref('stg_houses') }}
