select
    id,
    region,
    sqft::float8 as sqft,
    rooms::float8 as rooms,
    price::float8 as price
from {{ ref('houses') }}
