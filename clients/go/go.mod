module punctual/client

go 1.19
