module example.com/scanmod

go 1.26
