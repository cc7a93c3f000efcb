{{ config(
    materialized='pgad_model',
    model='λ(d, w) w.per_sqft*d.sqft + w.per_room*d.rooms + w.base',
    loss='squared',
    label='price',
    weights={'per_sqft': 0, 'per_room': 0, 'base': 0},
    group_by='region',
    optimizer='lbfgs',
    iterations=200,
    standardize=true,
    deploy=var('pgad_deploy', true)
) }}

select region, sqft, rooms, price
from {{ ref('stg_houses') }}
