// Manifest module
