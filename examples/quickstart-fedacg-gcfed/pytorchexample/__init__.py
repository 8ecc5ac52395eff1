"""pytorchexample: Flower's quickstart-pytorch on digits, with FedACG and GC-Fed."""
