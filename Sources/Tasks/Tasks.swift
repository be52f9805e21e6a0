// Tasks module
