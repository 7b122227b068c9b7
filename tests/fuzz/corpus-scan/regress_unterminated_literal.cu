{extern __shared__ _'
b[];