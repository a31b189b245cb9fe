// placeholder until the example lands
int main() { return 0; }
