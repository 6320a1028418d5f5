module github.com/sluice-proxy/sluice

go 1.26
